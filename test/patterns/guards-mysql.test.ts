import { MARIADB, requireService } from '../support/services.js';
import { mysqlDatabase } from '../support/databases.js';
import { describeGuards } from './guards-contract.js';

describeGuards('MariaDB', await requireService(MARIADB), mysqlDatabase);
